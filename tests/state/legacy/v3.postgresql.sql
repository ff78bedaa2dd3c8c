-- The schema the ordered migrations of state/migrations.py (before Alembic) made
-- on an empty database: schema_version 3, captured from the statements they ran.

CREATE TABLE repo_binding (
    id VARCHAR(200) NOT NULL,
    url VARCHAR NOT NULL,
    branch VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    project VARCHAR NOT NULL,
    last_seen_commit VARCHAR,
    last_applied_commit VARCHAR,
    last_poll_at TIMESTAMP WITH TIME ZONE,
    last_error VARCHAR,
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (id)
);

CREATE TABLE event (
    id SERIAL NOT NULL,
    kind VARCHAR NOT NULL,
    project VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    at TIMESTAMP WITH TIME ZONE NOT NULL,
    type VARCHAR NOT NULL,
    reason VARCHAR NOT NULL,
    message VARCHAR NOT NULL,
    PRIMARY KEY (id)
);

CREATE INDEX ix_event_at ON event (at);

CREATE INDEX ix_event_key ON event (kind, project, name);

CREATE TABLE lease (
    binding_id VARCHAR(200) NOT NULL,
    holder VARCHAR NOT NULL,
    expires_at TIMESTAMP WITH TIME ZONE NOT NULL,
    token INTEGER NOT NULL,
    PRIMARY KEY (binding_id)
);

CREATE TABLE replica (
    id VARCHAR(200) NOT NULL,
    heartbeat_at TIMESTAMP WITH TIME ZONE NOT NULL,
    PRIMARY KEY (id)
);

CREATE INDEX ix_replica_heartbeat_at ON replica (heartbeat_at);

CREATE TABLE schema_version (
    id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT ck_schema_version_single_row CHECK (id = 1)
);

CREATE TABLE sync (
    id SERIAL NOT NULL,
    binding_id VARCHAR NOT NULL,
    commit VARCHAR NOT NULL,
    started_at TIMESTAMP WITH TIME ZONE NOT NULL,
    finished_at TIMESTAMP WITH TIME ZONE,
    result VARCHAR NOT NULL,
    message VARCHAR NOT NULL,
    plan JSON NOT NULL,
    summary JSON NOT NULL,
    PRIMARY KEY (id),
    FOREIGN KEY(binding_id) REFERENCES repo_binding (id)
);

CREATE INDEX ix_sync_binding_id ON sync (binding_id);

CREATE TABLE inventory (
    id SERIAL NOT NULL,
    kind VARCHAR NOT NULL,
    project VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    binding_id VARCHAR NOT NULL,
    manifest JSON NOT NULL,
    spec_hash VARCHAR NOT NULL,
    source_commit VARCHAR,
    source_file VARCHAR,
    provider VARCHAR,
    provider_id VARCHAR,
    phase VARCHAR,
    reason VARCHAR,
    message VARCHAR,
    fix VARCHAR,
    status JSON NOT NULL,
    cost_usd VARCHAR NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL,
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL,
    finished_at TIMESTAMP WITH TIME ZONE,
    deleted BOOLEAN NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT uq_inventory_key UNIQUE (kind, project, name),
    FOREIGN KEY(binding_id) REFERENCES repo_binding (id)
);

CREATE INDEX ix_inventory_phase ON inventory (phase);

CREATE INDEX ix_inventory_binding_id ON inventory (binding_id);

CREATE TABLE check_record (
    id SERIAL NOT NULL,
    binding_id VARCHAR NOT NULL,
    commit VARCHAR NOT NULL,
    context VARCHAR NOT NULL,
    state VARCHAR NOT NULL,
    summary VARCHAR NOT NULL,
    posted_at TIMESTAMP WITH TIME ZONE NOT NULL,
    target VARCHAR NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT uq_check_record_key UNIQUE (commit, context, target),
    FOREIGN KEY(binding_id) REFERENCES repo_binding (id)
);

CREATE INDEX ix_check_record_binding_id ON check_record (binding_id);

CREATE TABLE intent (
    id SERIAL NOT NULL,
    binding_id VARCHAR NOT NULL,
    sync_id INTEGER,
    action VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    project VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    spec_hash VARCHAR NOT NULL,
    idempotency_key VARCHAR NOT NULL,
    payload JSON NOT NULL,
    state VARCHAR NOT NULL,
    outcome JSON NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL,
    done_at TIMESTAMP WITH TIME ZONE,
    PRIMARY KEY (id),
    FOREIGN KEY(binding_id) REFERENCES repo_binding (id),
    FOREIGN KEY(sync_id) REFERENCES sync (id),
    UNIQUE (idempotency_key)
);

CREATE INDEX ix_intent_binding_state ON intent (binding_id, state);

CREATE INDEX ix_intent_binding_id ON intent (binding_id);

INSERT INTO schema_version (id, version) VALUES (1, 3);

