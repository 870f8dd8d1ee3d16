-- Pending approvals are set `expired` (with their audit event) shortly after they expire; the
-- expiry round finds them by this index, whatever the number of decided ones.
CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE status = 'pending';
