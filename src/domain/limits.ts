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
  /** Default page size of list RPCs. */
  defaultPageSize: 20,
  /** Largest page size of list RPCs. */
  maxPageSize: 100,
} as const;
