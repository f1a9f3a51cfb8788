"""The agent loop and its session: scripts, the compaction session, the HTTP loop, records and ground truth."""
