//! ZooKeeper servers on free ports (none yet).
