import type { ChildProcess } from "node:child_process";
import { firstMessage, forkBenchProcess, stopChild } from "./processes.js";

/** `stats` asks for the counts; `reset` clears them and answers with the cleared counts. */
export type ReceiverCommand = "stats" | "reset";

/** What the receiver got since the last reset. */
export interface ReceiverStats {
  /** Distinct events (by `webhook-id`). */
  readonly events: number;
  /** Deliveries of an event already received (retries the receiver did not need). */
  readonly duplicates: number;
  /** Epoch milliseconds at which the last new event arrived; 0 before any. */
  readonly lastAt: number;
  readonly byType: Readonly<Record<string, number>>;
}

/** The receiver process, seen from the bench. */
export interface WebhookReceiver {
  readonly url: string;
  stats(): Promise<ReceiverStats>;
  reset(): Promise<ReceiverStats>;
  stop(): Promise<void>;
}

/** Forks `bench/webhook-receiver.ts` and waits until it listens. */
export async function startReceiver(): Promise<WebhookReceiver> {
  const child: ChildProcess = forkBenchProcess("bench/webhook-receiver.ts");
  const { port } = await firstMessage<{ port: number }>(child);
  // One question at a time, so each answer belongs to its question.
  let queue: Promise<unknown> = Promise.resolve();
  const ask = (command: ReceiverCommand) => {
    const answer = queue.then(() => {
      const reply = firstMessage<ReceiverStats>(child);
      child.send(command);
      return reply;
    });
    queue = answer.catch(() => undefined);
    return answer;
  };
  return {
    url: `http://127.0.0.1:${port}/hooks/referrals`,
    stats: () => ask("stats"),
    reset: () => ask("reset"),
    stop: () => stopChild(child),
  };
}
