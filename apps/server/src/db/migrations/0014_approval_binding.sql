-- An approval authorises one exact act: the digest of the act it was asked for (agent,
-- environment, declared input with its context, and the execution: method, URL and body
-- digest, or MCP server, tool and arguments digest), what that execution is (shown to the
-- approver, secrets redacted), and the rule and policy version that asked for it.
-- Approvals from before this migration have no digest and so authorise no runtime decision.
ALTER TABLE approvals
  ADD COLUMN input_digest text,
  ADD COLUMN environment text,
  ADD COLUMN tool text,
  ADD COLUMN execution jsonb,
  ADD COLUMN rule_id text,
  ADD COLUMN policy_version integer;
