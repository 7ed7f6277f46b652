import { limits } from "../domain/limits.js";
import { optionalText, requiredText } from "./validate.js";

/**
 * A checkpoint name, as IngestCheckpoint takes it. Campaigns name the
 * checkpoints they wait for (reward triggers, placements) by the same rule,
 * so a campaign never waits for a name no ingest can carry.
 */
export function checkpointName(value: string, field: string): string {
  return requiredText(value, field, limits.checkpointName);
}

/** An optional checkpoint name: unset stays unset; when given, as {@link checkpointName}. */
export function optionalCheckpointName(
  value: string | undefined,
  field: string,
): string | undefined {
  return optionalText(value, field, limits.checkpointName);
}
