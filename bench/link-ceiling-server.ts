/**
 * The share links' bare ceiling as a process of its own (forked by the
 * bench's links suite): reads the redirect's shape from the parent,
 * listens, and reports its origin.
 */
import { type LinkCeilingShape, listenLinkCeiling } from "./lib/ceilings.js";

process.once("message", (shape) => {
  listenLinkCeiling(shape as LinkCeilingShape).then(
    (origin) => process.send?.(origin),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
});
