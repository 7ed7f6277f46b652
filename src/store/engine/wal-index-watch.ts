import { closeSync, openSync, readSync } from "node:fs";

/**
 * The wal-index header: two copies of 48 bytes at the start of a WAL
 * database's `-shm` file, which the writer rewrites at every commit (its
 * `iChange` counts transactions). See https://www.sqlite.org/walformat.html.
 */
const headerBytes = 96;

/**
 * Tells a reader in another process than the writer, with one 96-byte read,
 * whether anything committed since it last read the file again. `PRAGMA
 * data_version` answers the same but begins a read transaction, whose
 * shared-memory locks cost a worker several times this read under load;
 * the PRAGMA runs only once the header moved.
 */
export class WalIndexWatch {
  private readonly read = Buffer.alloc(headerBytes);
  private readonly accepted = Buffer.alloc(headerBytes);
  private known = false;

  private constructor(private readonly fd: number) {}

  /** Undefined when the `-shm` file cannot be opened: the reader then asks SQLite every time. */
  static open(databaseFile: string): WalIndexWatch | undefined {
    try {
      return new WalIndexWatch(openSync(`${databaseFile}-shm`, "r"));
    } catch {
      return undefined;
    }
  }

  /**
   * Reads the header: false when it is the one last {@link accept}ed, so
   * nothing committed since. A commit acknowledged before this call wrote
   * its header before, so a header read now shows it.
   */
  moved(): boolean {
    const length = readSync(this.fd, this.read, 0, headerBytes, 0);
    return !(this.known && length === headerBytes && this.read.equals(this.accepted));
  }

  /** The reader read the file again after {@link moved}: what it saw is at least that header. */
  accept(): void {
    this.read.copy(this.accepted);
    this.known = true;
  }

  close(): void {
    closeSync(this.fd);
  }
}
