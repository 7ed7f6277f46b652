import type { DescEnum } from "@bufbuild/protobuf";
import { type Environment, EnvironmentSchema } from "../../gen/referral/v1/resources_pb.js";
import { enumWords } from "../contract/options.js";
import { isValidEmail } from "../domain/email.js";
import { limits } from "../domain/limits.js";
import type { EnvironmentName } from "../domain/tenancy.js";
import { invalidArgument } from "./errors.js";

/** A required string: present, not blank, at most `max` characters. */
export function requiredText(value: string, field: string, max: number = limits.shortText): string {
  if (value.trim() === "") throw invalidArgument(field, "is required");
  return boundedText(value, field, max);
}

/** An optional string: unset stays unset; when given, not blank and at most `max` characters. */
export function optionalText(
  value: string | undefined,
  field: string,
  max: number = limits.shortText,
): string | undefined {
  if (value === undefined) return undefined;
  if (value.trim() === "") throw invalidArgument(field, "must not be empty");
  return boundedText(value, field, max);
}

function boundedText(value: string, field: string, max: number): string {
  if (value.length > max) throw invalidArgument(field, `must be at most ${max} characters`);
  return value;
}

/** An optional email: validated when given. */
export function optionalEmail(value: string | undefined, field: string): string | undefined {
  const email = optionalText(value, field, limits.email);
  if (email !== undefined && !isValidEmail(email.trim())) {
    throw invalidArgument(field, "must be a valid email address");
  }
  return email?.trim();
}

/** A page request: limit 1..100 (default 20), offset >= 0 (default 0). */
export function pageOf(limit: number | undefined, offset: number | undefined) {
  const size = limit ?? limits.defaultPageSize;
  if (size < 1 || size > limits.maxPageSize) {
    throw invalidArgument("limit", `must be between 1 and ${limits.maxPageSize}`);
  }
  const skip = offset ?? 0;
  if (skip < 0) throw invalidArgument("offset", "must not be negative");
  return { limit: size, offset: skip };
}

/**
 * The word an enum value is stored and shown as (its REST word, from the
 * descriptors); unset gives undefined and a number the enum lacks is refused.
 */
export function enumWord<Word extends string>(
  schema: DescEnum,
  value: number,
  field: string,
): Word | undefined {
  if (value === 0) return undefined;
  const words = enumWords(schema);
  const word = words.byNumber.get(value);
  if (word === undefined) throw invalidArgument(field, `must be one of: ${words.words.join(", ")}`);
  return word as Word;
}

/** The stored name of an environment; unset gives undefined, an unknown number is refused. */
export function environmentName(
  value: Environment,
  field = "environment",
): EnvironmentName | undefined {
  return enumWord<EnvironmentName>(EnvironmentSchema, value, field);
}

/** An environment that is required. */
export function requiredEnvironment(value: Environment, field: string): EnvironmentName {
  const name = environmentName(value, field);
  if (!name) throw invalidArgument(field, "is required: production or test");
  return name;
}

/** An environment that defaults to production. */
export function environmentOrProduction(value: Environment): EnvironmentName {
  return environmentName(value) ?? "production";
}
