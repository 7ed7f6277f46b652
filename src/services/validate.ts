import type { DescEnum } from "@bufbuild/protobuf";
import { type Environment, EnvironmentSchema } from "../../gen/referral/v1/resources_pb.js";
import { enumWords } from "../contract/options.js";
import { isValidEmail } from "../domain/email.js";
import { limits } from "../domain/limits.js";
import type { EnvironmentName } from "../domain/tenancy.js";
import { cleanText, type TextForm } from "../domain/text.js";
import { invalidArgument } from "./errors.js";

/**
 * A required text, cleaned by the text rule (see `cleanText`): present,
 * with something visible, at most `max` characters once cleaned. Texts
 * longer than a line's limit (notes, descriptions, bodies) are multi-line
 * unless `form` says otherwise.
 */
export function requiredText(
  value: string,
  field: string,
  max: number = limits.shortText,
  form: TextForm = formFor(max),
): string {
  const text = cleaned(value, field, form);
  if (text.blank) throw invalidArgument(field, "is required");
  return bounded(text.text, field, max);
}

/** An optional text: unset stays unset; when given, cleaned like a required one and not blank. */
export function optionalText(
  value: string | undefined,
  field: string,
  max: number = limits.shortText,
  form: TextForm = formFor(max),
): string | undefined {
  if (value === undefined) return undefined;
  const text = cleaned(value, field, form);
  if (text.blank) throw invalidArgument(field, "must not be empty");
  return bounded(text.text, field, max);
}

function formFor(max: number): TextForm {
  return max >= limits.note ? "multiline" : "line";
}

function cleaned(value: string, field: string, form: TextForm) {
  const text = cleanText(value, form);
  if ("refused" in text) throw invalidArgument(field, text.refused);
  return text;
}

function bounded(value: string, field: string, max: number): string {
  if (value.length > max) throw invalidArgument(field, `must be at most ${max} characters`);
  return value;
}

/**
 * An optional email: a text on one line that `validator`'s isEmail takes
 * (a local part of at most 64 characters, 254 in all, a domain with a
 * top-level domain, no IP address); Unicode local parts and domains are
 * accepted, as mail systems deliver to them.
 */
export function optionalEmail(value: string | undefined, field: string): string | undefined {
  const email = optionalText(value, field, limits.email, "line");
  if (email !== undefined && !isValidEmail(email)) {
    throw invalidArgument(
      field,
      "must be a valid email address (at most 64 characters before the @ and 254 in all)",
    );
  }
  return email;
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
