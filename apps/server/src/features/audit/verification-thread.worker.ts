/** The audit verification thread (started by AuditVerifications): full verifications on a connection of its own. */
import { serveOnThread } from '../../db/database-thread.ts';
import { type Verification, type VerificationProgress, verifyTree } from './verification.ts';
import { type FullVerification, logKeyOf } from './verification-runs.ts';

await serveOnThread<FullVerification, Verification, VerificationProgress>((database, request, progress) =>
  verifyTree(database.db, logKeyOf(request), request.workspaceId, { full: true, signed: request.signed, progress }),
);
