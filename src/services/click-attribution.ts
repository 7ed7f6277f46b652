import { defaultWindowDays } from "../domain/links.js";
import type { AttributionRecord } from "../domain/referral-transitions.js";
import type { Clock } from "../domain/tenancy.js";
import type { CampaignDoc, ClickDoc, CustomerDoc } from "../store/documents.js";
import type { TenantStore } from "../store/tenant-store.js";
import type { CodeLookups } from "./context.js";
import { failedPrecondition, notFound } from "./errors.js";

/**
 * A click on a share link as a referral's attribution (docs/links.md): the
 * click, its campaign and its referrer, each checked before anything is
 * written.
 */
export interface ClickAttribution {
  readonly click: ClickDoc;
  readonly campaign: CampaignDoc;
  readonly referrer: CustomerDoc;
  readonly record: AttributionRecord;
}

/**
 * The click `clickId` names, within its campaign's window: NOT_FOUND for an
 * unknown click (or one removed when its window ended; counted as a failed
 * code lookup, so click ids cannot be searched either), FAILED_PRECONDITION
 * for one older than the window.
 */
export async function clickAttribution(
  store: TenantStore,
  lookups: CodeLookups,
  clickId: string,
  clock: Clock,
): Promise<ClickAttribution> {
  await lookups.beforeLookup();
  const click = await store.clicks.find(clickId);
  if (!click || click.bot !== null) {
    await lookups.lookupFailed();
    throw notFound(
      `click ${clickId}`,
      "it is unknown, or its campaign's attribution window ended and it was removed",
    );
  }
  const campaign = await store.campaigns.find(click.campaignId);
  if (!campaign) throw notFound(`campaign ${click.campaignId}`);
  const windowDays = campaign.attribution?.windowDays || defaultWindowDays;
  if (clock().getTime() - click.createdAt.getTime() > windowDays * 86_400_000) {
    throw failedPrecondition(
      `click ${click._id} was made more than the campaign's ${windowDays}-day attribution window ago`,
    );
  }
  const referrer = await store.customers.findByReferralCode(campaign.environment, click.code);
  if (!referrer) throw notFound(`referral code ${click.code}`, "its customer is gone");
  return {
    click,
    campaign,
    referrer,
    record: { method: "click", clickId: click._id, clickedAt: click.createdAt },
  };
}
