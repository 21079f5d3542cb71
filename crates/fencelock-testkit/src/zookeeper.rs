//! ZooKeeper servers for tests (none yet).
