/** What `warden --help` prints: every command and option of the CLI (cli.ts). */
export const USAGE = `usage:
  warden workspaces create --slug S [--name N] [--json]
  warden keys create --workspace S --permissions a,b|* [--name N] [--json]
  warden keys list --workspace S [--json]
  warden keys revoke ID [--json]
  warden migrate [--json]
  warden webhooks create --workspace S --url U --events '*'|a,b [--description D] [--json]
  warden webhooks list --workspace S [--json]
  warden webhooks pause|resume|delete ID --workspace S [--json]
  warden credentials set NAME --workspace S [--hosts h1,h2] [--header H] [--json]
      stores an upstream credential for the HTTP proxy, or rotates its secret: the secret is read
      from WARDEN_CREDENTIAL_SECRET, else from stdin (never from the command line); a bearer
      token unless --header names an API-key header; --hosts is required the first time
  warden credentials list --workspace S [--json]
  warden credentials delete NAME --workspace S [--json]
  warden billing set-plan --workspace S --plan P [--json]
  warden audit export --workspace S [--out FILE] [--json]
      the workspace's audit log as NDJSON (stdout without --out): a header, its events in
      leaf order, its signed checkpoints
  warden audit verify --export FILE [--checkpoint FILE ...] --public-key KEY|FILE [--json]
      verifies an export without the database against its checkpoints and those held outside
      (the server's checkpoint file, a webhook body, a GET /audit/checkpoint answer, a note);
      KEY is the log's verifier key (GET /audit/signing-key verifier_key), or a file holding it;
      with --witness VKEY (repeated; GET /audit/signing-key witnesses[].verifier_key) only
      checkpoints cosigned by K of them (--witness-quorum, default all) are trusted;
      exit 0: valid, 1: a problem (each printed with its first bad index), 2: usage error
  warden audit prove EVENT_ID --url API --public-key KEY|FILE [--witness VKEY ...] [--out FILE] [--json]
      the event's inclusion as a C2SP tlog-proof file (the signed checkpoint, the event's
      index, its inclusion proof and its canonical bytes), made only once it verified with the
      pinned key (and witnesses); the API key in WARDEN_API_KEY (audit:read)
  warden audit verify --proof FILE --public-key KEY|FILE [--witness VKEY ...] [--json]
      verifies a tlog-proof offline; exit 0: valid, 1: not, 2: usage error
      --policy FILE (C2SP tlog-policy: log, witness, group, quorum lines) in place of
      --public-key, --witness and --witness-quorum, for audit verify and audit prove
  warden policies test DIR [--junit FILE] [--json]
      runs the test cases of a policy directory (one policy per YAML or JSON file, as POST
      /policies takes it; cases in *.test.yaml) with the server's evaluator, offline;
      --junit writes JUnit XML; exit 0: all pass, 1: a case fails, 2: a file is not valid
  warden policies diff|apply DIR --url API [--prune] [--json]
      what applying the directory to a running Warden would change, or applies it as one
      change (one audit event with the bundle's digest and git commit; defaults.yaml sets the
      default decisions); --prune deletes the workspace's policies the directory does not have;
      the key (policies:write) is read from WARDEN_API_KEY
  warden policies apply DIR --url API --what-if [--max-changed PCT] [--what-if-limit N] [--yes]
      first replays the recent decisions (default 10000) with the workspace as the bundle would
      make it and refuses, or asks on a terminal, when more than PCT % (default 5) change;
      the key needs audit:read and policies:read too; exit 0: applied (or nothing to change),
      1: refused by the API or by what-if, 2: the directory is not valid or an option misplaced
  warden policies export DIR --url API [--force] [--json]
      writes the workspace's policies to DIR, one YAML file each, and its default decisions to
      defaults.yaml (key: policies:read); --force replaces the policy files DIR has (its test
      files stay); exit 0: written, 1: refused by the API, 2: DIR has policy files already
  warden policies fixtures --from-audit --url API [--since 7d] [--limit N] [--out FILE] [--json]
      test cases cut from the recorded decisions since then (a duration or a timestamp), one
      per distinct act, at most N (default 1000), kept when today's policies decide them as
      recorded (key: audit:read, agents:read, policies:read); the cases assume the
      directory's defaults.yaml; exit 0: written, 1: refused by the API, 2: usage error
  warden witness --name NAME --data-dir DIR --log-key KEY [--log-key KEY ...] [--listen HOST:PORT]
                 [--origin-prefix P] [--key-algorithm ml-dsa-44|ed25519] [--json]
      runs a C2SP tlog-witness on HOST:PORT (default 127.0.0.1:7380) until stopped: it cosigns a
      checkpoint of a log under P (default warden/audit/) signed by KEY (GET /audit/signing-key
      public_key or ml_dsa_44.public_key, or a file holding it or that JSON) only when it
      extends the last one it cosigned; its key (made ML-DSA-44 unless --key-algorithm says
      ed25519) and state stay in DIR; prints its vkey for WARDEN_AUDIT_WITNESSES
--json prints one JSON document on stdout; through npm, run \`npm run -s warden -- …\` (or \`npx warden …\`)
so that npm's banner does not come first`;
