import { evidenceVersion, type ReferralEvidence } from "../../src/domain/fraud-evidence.js";

/** The evidence of an attribution that says nothing: for store tests that write referrals directly. */
export function plainEvidence(at: Date = new Date()): ReferralEvidence {
  return {
    version: evidenceVersion,
    gatheredAt: at,
    referrerEmail: null,
    refereeEmail: null,
    disposableListVersion: "test",
    nameSimilarity: null,
    emailLocalDistance: null,
    refereeAgeSeconds: 0,
    referrerAgeSeconds: 0,
    referrerFlagged: 0,
    referrerRejected: 0,
    referrerReferralsLastHour: 0,
    referrerReferralsLastDay: 0,
    networkReferralsLastDay: null,
    networkClicksLastDay: null,
    refereeMailboxReferred: false,
    refereeNetwork: null,
    referrerNetwork: null,
  };
}
