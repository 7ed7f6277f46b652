import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type Campaign, CampaignSchema } from "../../gen/referral/v1/resources_pb.js";
import { docFieldsFromMessage, messageFromDoc } from "../contract/records.js";
import { newId } from "../domain/ids.js";
import { limits } from "../domain/limits.js";
import type { Tenant } from "../domain/tenancy.js";
import type { CampaignDoc } from "../store/documents.js";
import { invalidArgument } from "./errors.js";
import { requiredEnvironment, requiredText } from "./validate.js";

/** Fields a caller may not set: the service owns them. */
const serviceOwnedFields = new Set([
  "id",
  "organization_id",
  "application_id",
  "environment",
  "created_at",
  "updated_at",
  "deleted_at",
]);

/** The campaign fields an update may replace, by proto and JSON name. */
export const editableCampaignFields: ReadonlyMap<string, string> = new Map(
  CampaignSchema.fields
    .filter((field) => !serviceOwnedFields.has(field.name))
    .flatMap((field) => [
      [field.name, field.localName],
      [field.jsonName, field.localName],
    ]),
);

/**
 * A new campaign document from a caller's campaign: checks the required
 * fields, assigns ids, ownership and times to it and to its rewards, emails,
 * pages and FAQs.
 */
export function newCampaignDoc(
  tenant: Tenant,
  input: MessageInitShape<typeof CampaignSchema>,
  now: Date,
): CampaignDoc {
  const campaign = create(CampaignSchema, input);
  requiredText(campaign.name, "campaign.name");
  requiredEnvironment(campaign.environment, "campaign.environment");
  campaign.id = newId("cmp", now);
  campaign.organizationId = tenant.organizationId;
  campaign.applicationId = tenant.applicationId;
  campaign.createdAt = timestampFromDate(now);
  campaign.updatedAt = timestampFromDate(now);
  campaign.deletedAt = undefined;
  stampChildren(campaign, now);
  return docFieldsFromMessage(CampaignSchema, campaign) as CampaignDoc;
}

/**
 * The fields an update writes: the editable fields named in `mask` (all
 * when empty), taken from `input`, with the children re-stamped.
 */
export function campaignUpdateFields(
  current: CampaignDoc,
  input: Campaign,
  mask: readonly string[],
  now: Date,
): Partial<CampaignDoc> {
  const names = mask.length > 0 ? mask : [...new Set(editableCampaignFields.values())];
  const merged = messageFromDoc(CampaignSchema, current);
  for (const name of names) {
    const localName = editableCampaignFields.get(name);
    if (!localName)
      throw invalidArgument("updateMask", `names no editable campaign field: ${name}`);
    (merged as unknown as Record<string, unknown>)[localName] = (
      input as unknown as Record<string, unknown>
    )[localName];
  }
  requiredText(merged.name, "campaign.name");
  stampChildren(merged, now);
  const { _id, ...fields } = docFieldsFromMessage(CampaignSchema, merged);
  return fields as Partial<CampaignDoc>;
}

function stampChildren(campaign: Campaign, now: Date): void {
  const owner = {
    organizationId: campaign.organizationId,
    applicationId: campaign.applicationId,
    campaignId: campaign.id,
  };
  const stamp = <T extends { id: string }>(items: T[], prefix: string, field: string) => {
    items.forEach((item, index) => {
      if (item.id.length > limits.shortText) {
        throw invalidArgument(`campaign.${field}[${index}].id`, "is too long");
      }
      item.id ||= newId(prefix, now);
    });
  };
  stamp(campaign.rewards, "rwd", "rewards");
  stamp(campaign.emails, "eml", "emails");
  stamp(campaign.campaignPages, "pag", "campaignPages");
  stamp(campaign.faqs, "faq", "faqs");
  for (const item of [...campaign.rewards, ...campaign.emails]) {
    Object.assign(item, owner);
    item.createdAt ??= timestampFromDate(now);
    item.updatedAt = timestampFromDate(now);
  }
}
