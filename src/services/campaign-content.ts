import type { DescEnum } from "@bufbuild/protobuf";
import {
  type Campaign,
  type CampaignPage,
  CurrencySchema,
  type Email,
  EmailTypeSchema,
  type Faq,
  PlatformSchema,
  type Reward,
  RewardApprovalSchema,
  RewardLimitIntervalSchema,
  RewardLimitUnitSchema,
  RewardMethodSchema,
  RewardPartySchema,
  RewardTypeSchema,
} from "../../gen/referral/v1/resources_pb.js";
import { enumWords } from "../contract/options.js";
import { appPathProblem, campaignUrlProblem } from "../domain/campaign-links.js";
import { limits } from "../domain/limits.js";
import type { EnvironmentName } from "../domain/tenancy.js";
import { optionalCheckpointName } from "./checkpoint-names.js";
import { invalidArgument } from "./errors.js";
import { enumWord, optionalText, requiredText } from "./validate.js";

/**
 * What a campaign shows, checked when it is saved: every text, link and
 * list within its maximum, every enum a value the contract has. Texts are
 * written back as the text rule cleans them (see `requiredText`), so what
 * is stored is what was bounded. The mobile SDKs receive each campaign
 * whole (`GET /campaigns`), so these maxima bound that response;
 * docs/admin.md lists them and the largest campaign they allow.
 * `environment` is the campaign's: links may use http in test only.
 */
export function checkCampaignContent(campaign: Campaign, environment: EnvironmentName): void {
  const allowHttp = environment === "test";
  const url = (value: string | undefined, field: string) => checkedUrl(value, field, { allowHttp });
  campaign.name = requiredText(campaign.name, "campaign.name");
  campaign.refereeLandingPageUrl = url(
    campaign.refereeLandingPageUrl,
    "campaign.refereeLandingPageUrl",
  );
  campaign.termsUrl = url(campaign.termsUrl, "campaign.termsUrl");
  campaign.proposedRewardTrigger = optionalCheckpointName(
    campaign.proposedRewardTrigger,
    "campaign.proposedRewardTrigger",
  );
  campaign.manualRewardTrigger = optionalCheckpointName(
    campaign.manualRewardTrigger,
    "campaign.manualRewardTrigger",
  );
  campaign.inviteMessage = optionalText(
    campaign.inviteMessage,
    "campaign.inviteMessage",
    limits.note,
  );
  campaign.copiedFromCampaignId = optionalText(
    campaign.copiedFromCampaignId,
    "campaign.copiedFromCampaignId",
  );
  checkPlatforms(campaign.platforms);

  const lists = [
    ["rewards", campaign.rewards, limits.campaign.rewards],
    ["emails", campaign.emails, limits.campaign.emails],
    ["campaignPages", campaign.campaignPages, limits.campaign.pages],
    ["faqs", campaign.faqs, limits.campaign.faqs],
  ] as const;
  for (const [name, items, max] of lists) {
    if (items.length > max) {
      throw invalidArgument(`campaign.${name}`, `must have at most ${max} entries`);
    }
  }
  for (const [index, reward] of campaign.rewards.entries()) {
    checkRewardContent(reward, `campaign.rewards[${index}]`);
  }
  for (const [index, email] of campaign.emails.entries()) {
    checkEmail(email, `campaign.emails[${index}]`, allowHttp);
  }
  for (const [index, page] of campaign.campaignPages.entries()) {
    checkPage(page, `campaign.campaignPages[${index}]`);
  }
  for (const [index, faq] of campaign.faqs.entries()) {
    checkFaq(faq, `campaign.faqs[${index}]`);
  }
}

/** A reward's texts and enums; its terms (amounts, limit, durations) are the ledger's to check. */
function checkRewardContent(reward: Reward, path: string): void {
  reward.name = optionalText(reward.name, `${path}.name`);
  reward.description = optionalText(reward.description, `${path}.description`, limits.note);
  knownEnum(RewardTypeSchema, reward.type, `${path}.type`);
  knownEnum(RewardPartySchema, reward.party, `${path}.party`);
  knownEnum(RewardMethodSchema, reward.method, `${path}.method`);
  knownEnum(CurrencySchema, reward.currency, `${path}.currency`);
  knownEnum(RewardLimitUnitSchema, reward.limitUnit, `${path}.limitUnit`);
  knownEnum(RewardLimitIntervalSchema, reward.limitInterval, `${path}.limitInterval`);
  knownEnum(RewardApprovalSchema, reward.approval, `${path}.approval`);
}

function checkEmail(email: Email, path: string, allowHttp: boolean): void {
  knownEnum(EmailTypeSchema, email.type, `${path}.type`);
  email.subjectLine = unlessEmpty(email.subjectLine, `${path}.subjectLine`, limits.shortText);
  email.message = unlessEmpty(email.message, `${path}.message`, limits.longText);
  email.buttonText = unlessEmpty(email.buttonText, `${path}.buttonText`, limits.shortText);
  email.buttonColor = unlessEmpty(email.buttonColor, `${path}.buttonColor`, limits.shortText);
  email.logoUrl = checkedUrl(email.logoUrl, `${path}.logoUrl`, { allowHttp });
  const size = email.logoSize;
  if (size !== undefined && !(size >= 1 && size <= limits.campaign.maxLogoSize)) {
    throw invalidArgument(
      `${path}.logoSize`,
      `must be 1 to ${limits.campaign.maxLogoSize} pixels (leave it out for the default)`,
    );
  }
}

function checkPage(page: CampaignPage, path: string): void {
  page.path = requiredText(page.path, `${path}.path`);
  const problem = appPathProblem(page.path);
  if (problem) throw invalidArgument(`${path}.path`, problem);
  page.name = optionalText(page.name, `${path}.name`);
  page.placementId = optionalText(page.placementId, `${path}.placementId`);
  knownEnum(PlatformSchema, page.platform, `${path}.platform`);
}

function checkFaq(faq: Faq, path: string): void {
  faq.question = requiredText(faq.question, `${path}.question`);
  faq.answer = requiredText(faq.answer, `${path}.answer`, limits.note);
}

/** Each platform once, each one the contract has: so at most every platform. */
function checkPlatforms(platforms: readonly number[]): void {
  const seen = new Set<number>();
  for (const [index, platform] of platforms.entries()) {
    const field = `campaign.platforms[${index}]`;
    const word = enumWord(PlatformSchema, platform, field);
    if (word === undefined) {
      throw invalidArgument(field, `must be one of: ${enumWords(PlatformSchema).words.join(", ")}`);
    }
    if (seen.has(platform)) throw invalidArgument(field, `repeats ${word}`);
    seen.add(platform);
  }
}

/** An optional URL, cleaned as a one-line text (so trimmed) and then checked. */
function checkedUrl(
  value: string | undefined,
  field: string,
  options: { allowHttp: boolean },
): string | undefined {
  const url = optionalText(value, field, limits.url, "line");
  if (url === undefined) return undefined;
  const problem = campaignUrlProblem(url, options);
  if (problem) throw invalidArgument(field, problem);
  return url;
}

/** A text proto3 leaves empty when unset: empty is none, anything else is a text. */
function unlessEmpty(value: string, field: string, max: number): string {
  return value === "" ? "" : (optionalText(value, field, max) as string);
}

/** An enum value the contract has, or unset; a number it lacks (binary callers) is refused. */
function knownEnum(schema: DescEnum, value: number | undefined, field: string): void {
  if (value !== undefined) enumWord(schema, value, field);
}
