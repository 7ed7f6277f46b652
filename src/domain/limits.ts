/** Size limits of request values; exceeding one is INVALID_ARGUMENT naming the field. */
export const limits = {
  /** External user ids, names, checkpoint names, ids. */
  shortText: 256,
  /** Email addresses (RFC 5321 path limit). */
  email: 320,
  /** A reviewer's reason for a status change; a webhook's description. */
  note: 1024,
  /** Webhook URLs. */
  url: 2048,
  /** URLs and long texts such as email bodies. */
  longText: 8192,
  /** Keys in customProperties. */
  customPropertyKeys: 50,
  /** Serialized size of customProperties, in bytes. */
  customPropertiesBytes: 16 * 1024,
  /** Levels of objects and arrays in customProperties, itself the first. */
  customPropertiesDepth: 16,
  /**
   * Levels of objects and arrays in a JSON request body, itself the first.
   * Deeper is refused before any decoder, hash or serializer recurses into
   * it (a stack overflow would be a 500); shallow enough that protobuf's
   * own decoders (a limit of 100 nested messages, a Struct level costing up
   * to three) never reach theirs, so every protocol gives the same answer.
   */
  jsonDepth: 32,
  /** Default page size of list RPCs. */
  defaultPageSize: 20,
  /** Largest page size of list RPCs. */
  maxPageSize: 100,
} as const;
