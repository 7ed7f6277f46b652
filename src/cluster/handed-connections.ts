/**
 * A connection the primary was handing to a worker as the worker died is
 * otherwise never answered nor closed (nodejs/node#21746): `node:cluster`'s
 * round robin accepts each connection in the primary, writes its handle on
 * the chosen worker's IPC channel, and closes its own copy only once that
 * worker says it took it. A worker that dies first never says so, and the
 * client waits for ever, or until its own timeout.
 *
 * The primary holds no other connection: its only raw TCP handles without
 * a listener are connections accepted and not yet taken by a worker, each
 * taken within milliseconds by a live one. So when a worker exits, those
 * it held in hand then are looked at again after a grace: any still held
 * was the dead worker's, and is closed. Its client sees the connection
 * close unanswered, an error to retry on, rather than a hang.
 */
export function closeConnectionsLeftBy(graceMs: number, closed: (count: number) => void): void {
  const held = heldConnections();
  if (held.size === 0) return;
  setTimeout(() => {
    const still = heldConnections();
    let count = 0;
    for (const connection of held) {
      if (!still.has(connection)) continue;
      connection.close();
      count += 1;
    }
    if (count > 0) closed(count);
  }, graceMs).unref();
}

/**
 * Whether this Node still lists the primary's handles as the workaround
 * reads them (`process._getActiveHandles`, which Node keeps for diagnostics
 * but does not document): a test fails if an upgrade changes it.
 */
export function heldConnectionsVisible(): boolean {
  return typeof activeHandles() === "function";
}

interface RawHandle {
  readonly onconnection?: unknown;
  close(): void;
}

function activeHandles(): (() => unknown[]) | undefined {
  return (process as unknown as { _getActiveHandles?: () => unknown[] })._getActiveHandles;
}

/** The raw TCP handles the primary holds that listen for nothing: accepted connections. */
function heldConnections(): Set<RawHandle> {
  const handles = activeHandles()?.call(process) ?? [];
  return new Set(
    handles.filter(
      (handle): handle is RawHandle =>
        (handle as object | null)?.constructor?.name === "TCP" &&
        typeof (handle as RawHandle).onconnection !== "function" &&
        typeof (handle as RawHandle).close === "function",
    ),
  );
}
