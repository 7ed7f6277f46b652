/**
 * The bare ceilings as a process of their own (forked by the bench): reads
 * the captured responses from the parent, listens, and reports the origins.
 */
import { type CeilingResponses, listenCeilings } from "./lib/ceilings.js";

process.once("message", (responses) => {
  listenCeilings(responses as CeilingResponses).then(
    (origins) => process.send?.(origins),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
});
