import { type DescEnum, type DescField, type DescMethod, getOption } from "@bufbuild/protobuf";
import {
  Access,
  access,
  rest_content_type,
  rest_name,
  rest_omit_when_unset,
  rest_success_status,
} from "../../gen/referral/v1/options_pb.js";

const accessCache = new WeakMap<DescMethod, Access>();

/**
 * The credential an RPC accepts, from its `(referral.v1.access)` option.
 * Cached per method: every call asks, and reading an option decodes it.
 */
export function methodAccess(method: DescMethod): Access {
  let value = accessCache.get(method);
  if (value === undefined) {
    value = getOption(method, access);
    if (value === Access.UNSPECIFIED) value = Access.SECRET;
    accessCache.set(method, value);
  }
  return value;
}

/** The HTTP status of a successful REST call, from `(referral.v1.rest_success_status)`. */
export function restSuccessStatus(method: DescMethod): number {
  return getOption(method, rest_success_status) || 200;
}

/** The media type of a streamed body on REST, from `(referral.v1.rest_content_type)`. */
export function restContentType(method: DescMethod): string | undefined {
  return getOption(method, rest_content_type) || undefined;
}

/**
 * Whether REST leaves the field out when unset, from
 * `(referral.v1.rest_omit_when_unset)`. Not cached: the codec reads it once
 * per field when it compiles a message type.
 */
export function omitWhenUnset(field: DescField): boolean {
  return getOption(field, rest_omit_when_unset);
}

/** The words of one enum in both directions. */
export interface EnumWords {
  /** Number to REST word; the zero value has no word. */
  readonly byNumber: ReadonlyMap<number, string>;
  /** REST word, and the full proto value name, to number. */
  readonly byWord: ReadonlyMap<string, number>;
  /** The REST words, for error messages. */
  readonly words: readonly string[];
}

const enumWordsCache = new WeakMap<DescEnum, EnumWords>();

/**
 * The REST words of an enum: the `(referral.v1.rest_name)` option where set,
 * else the lowercase value name after the enum's prefix (`ENVIRONMENT_TEST`
 * is "test"). Computed once per enum.
 */
export function enumWords(desc: DescEnum): EnumWords {
  const cached = enumWordsCache.get(desc);
  if (cached) return cached;
  const byNumber = new Map<number, string>();
  const byWord = new Map<string, number>();
  const words: string[] = [];
  for (const value of desc.values) {
    byWord.set(value.name, value.number);
    if (value.number === 0) continue;
    const word =
      getOption(value, rest_name) ||
      value.name
        .slice(desc.sharedPrefix?.length ?? 0)
        .replace(/^_/, "")
        .toLowerCase();
    byNumber.set(value.number, word);
    byWord.set(word, value.number);
    words.push(word);
  }
  const result = { byNumber, byWord, words };
  enumWordsCache.set(desc, result);
  return result;
}
