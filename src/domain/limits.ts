/** Size limits of request values; exceeding one is INVALID_ARGUMENT naming the field. */
export const limits = {
  /** External user ids, names, ids. */
  shortText: 256,
  /**
   * Checkpoint names, as IngestCheckpoint takes them and as campaigns name
   * them (reward triggers, placements): one rule, so every name a campaign
   * can wait for is one a customer can reach.
   */
  checkpointName: 128,
  /** Email addresses (RFC 5321 path limit). */
  email: 320,
  /**
   * A reviewer's reason for a status change; a webhook's description; a
   * campaign's invite message, reward descriptions and FAQ answers.
   */
  note: 1024,
  /** Webhook URLs; a campaign's URLs (terms, landing page, email logos). */
  url: 2048,
  /** Long texts such as email bodies. */
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
  /**
   * What one campaign may hold. Every campaign of an application goes to
   * the mobile SDKs in full (`GET /campaigns`), so these bound that
   * response; docs/admin.md states the largest campaign they allow.
   */
  campaign: {
    rewards: 10,
    emails: 5,
    pages: 10,
    faqs: 20,
    /** Placement checkpoints (SetCampaignCheckpoints); the SDKs read them apart. */
    placementCheckpoints: 100,
    /**
     * The largest reward amount, in units of its currency, and the largest
     * `limit` (a number of rewards, or whole units of the currency): far
     * above any real referral reward, far inside the ledger's exact sums.
     */
    maxAmount: 1_000_000,
    /** An email's logo width, in pixels. */
    maxLogoSize: 1024,
  },
} as const;
