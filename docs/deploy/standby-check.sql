-- Is the hot standby streaming from the primary? (docs/DEPLOYMENT.md, "Standby")
-- Tested against a primary and a standby made with pg_basebackup -R
-- (tests/storage/test_deploy_standby.py).

-- On the primary: one row per standby, with state 'streaming'.
SELECT application_name, client_addr, state, sync_state, replay_lag FROM pg_stat_replication;

-- On the standby: status 'streaming', and in recovery (it takes no writes).
SELECT status, sender_host, sender_port FROM pg_stat_wal_receiver;
SELECT pg_is_in_recovery();
