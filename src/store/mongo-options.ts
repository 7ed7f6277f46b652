/**
 * How long a start waits for a MongoDB server to answer before it gives up.
 * Its own module, so the entry point can name it in its error line without
 * loading the driver.
 */
export const mongoServerSelectionTimeoutMs = 10_000;
