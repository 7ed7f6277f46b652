import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HttpBodySchema } from "../../gen/google/api/httpbody_pb.js";
import { isoString } from "../domain/iso-time.js";
import type { ReferralStatusName } from "../domain/referral-status.js";
import type { ReferralDoc } from "../store/documents.js";
import type { ExportFilter } from "../store/insights.js";
import type { TenantStore } from "../store/tenant-store.js";

/** The referrals read per page: one query, one customer lookup. */
const pageSize = 500;
/** The bytes gathered before a chunk is sent. */
const chunkBytes = 64 * 1024;

const statuses: readonly ReferralStatusName[] = [
  "pending",
  "flagged",
  "accepted",
  "rejected",
  "reversed",
];

/** The export's columns, in order (docs/insights.md describes each). */
export const exportColumns = [
  "id",
  "campaignId",
  "environment",
  "status",
  "createdAt",
  "updatedAt",
  "referrerId",
  "referrerExternalUserId",
  "refereeId",
  "refereeExternalUserId",
  ...statuses.map((status) => `${status}At`),
  "suspectedFrauds",
  "attribution",
  "clickedAt",
] as const;

const contentType = "text/csv; charset=utf-8";
const encoder = new TextEncoder();

/**
 * The referrals as CSV (RFC 4180: CRLF line ends, a header row, fields
 * quoted when they hold a comma, a quote or a line break), oldest first,
 * one page in memory at a time: each page is read after the chunk before
 * it was taken, so a slow reader holds the export back rather than
 * filling memory. Referrals whose referrer or referee was erased are left
 * out.
 */
export async function* referralsCsv(
  store: TenantStore,
  filter: ExportFilter,
  signal: AbortSignal,
): AsyncGenerator<MessageInitShape<typeof HttpBodySchema>> {
  let text = `${exportColumns.join(",")}\r\n`;
  let after: { createdAt: Date; id: string } | null = null;
  for (;;) {
    if (signal.aborted) return;
    const page: ReferralDoc[] = await store.insights.exportPage(filter, after, pageSize);
    const last = page.at(-1);
    if (last) after = { createdAt: last.createdAt, id: last._id };
    const customers = await store.insights.customersByIds(
      page.flatMap((referral) => [referral.referrerId, referral.refereeId]),
    );
    for (const referral of page) {
      const referrer = customers.get(referral.referrerId);
      const referee = customers.get(referral.refereeId);
      if (!referrer || !referee || referrer.deletedAt || referee.deletedAt) continue;
      text += `${csvRow([
        referral._id,
        referral.campaignId,
        referral.environment,
        referral.status,
        iso(referral.createdAt),
        iso(referral.updatedAt),
        referrer._id,
        spreadsheetSafe(referrer.externalUserId),
        referee._id,
        spreadsheetSafe(referee.externalUserId),
        ...statuses.map((status) => iso(reachedAt(referral, status))),
        referral.suspectedFrauds.map((fraud) => fraud.type).join(";"),
        // How the referrer was found (docs/links.md); empty before it was recorded.
        referral.attribution?.method ?? "",
        iso(referral.attribution?.clickedAt ?? null),
      ])}\r\n`;
    }
    const done = page.length < pageSize;
    if (text.length >= chunkBytes || done) {
      yield { contentType, data: encoder.encode(text) };
      text = "";
    }
    if (done) return;
  }
}

/** When the referral last reached a status; null if it never did. */
function reachedAt(referral: ReferralDoc, status: ReferralStatusName): Date | null {
  return referral.statusHistory.findLast((change) => change.toStatus === status)?.changedAt ?? null;
}

function iso(value: Date | null): string {
  return value ? isoString(new Date(value).getTime()) : "";
}

/**
 * One CSV record (RFC 4180): a field holding a quote, a line break or any
 * common delimiter (comma, semicolon, tab) is quoted, quotes doubled, so a
 * reader that splits on a semicolon or a tab (a spreadsheet in another
 * locale) does not cut it either.
 */
export function csvRow(fields: readonly string[]): string {
  return fields
    .map((field) => (/[",;\t\r\n]/.test(field) ? `"${field.replaceAll('"', '""')}"` : field))
    .join(",");
}

/**
 * A caller's text a spreadsheet could run as a formula gets an apostrophe
 * before it (OWASP's advice on CSV injection): where it starts, and after
 * every comma, semicolon, tab or pipe in it, since a reader that splits on
 * that character (whatever the file meant) starts a cell there. A cell
 * starts a formula with `=`, `+`, `-` or `@` (after spaces), or with a tab
 * or carriage return.
 */
export function spreadsheetSafe(text: string): string {
  return text.replace(/(^|[,;\t|])([ "]*)(?=[=+\-@\t\r])/g, "$1$2'");
}
