-- 0001: API tokens of oarlock serve. Only a token's SHA-256 is kept; the token itself is
-- shown once, when it is made. Applied in one transaction; server_schema records it.
CREATE TABLE api_tokens (
    id          TEXT             NOT NULL PRIMARY KEY,
    name        TEXT             NOT NULL,
    tenant      TEXT             NOT NULL,
    role        TEXT             NOT NULL CHECK (role IN ('viewer', 'operator', 'approver', 'admin')),
    token_hash  TEXT             NOT NULL UNIQUE,
    created_at  DOUBLE PRECISION NOT NULL,
    expires_at  DOUBLE PRECISION,
    revoked_at  DOUBLE PRECISION
);
CREATE INDEX api_tokens_by_tenant ON api_tokens (tenant, created_at);
