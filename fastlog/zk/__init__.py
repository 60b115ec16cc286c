"""Cluster mode on ZooKeeper, with Kafka's znode layout and payloads.

paths.py          every znode path and its JSON payload (encode/decode), Kafka's exactly
client.py         KafkaZkClient: one kazoo session used as a Kafka broker uses it
assignment.py     replica assignment (round-robin from a random start, rack-aware)
controller.py     ZkController: election, leader election, deletion, epoch-fenced writes
metadata_store.py ZkMetadataStore: fastlog.metadata.MetadataStore over ZooKeeper
meta_properties.py check_cluster_id: a log dir of another cluster is refused
cluster.py        ZkClusterMember: a broker's cluster-mode startup from its KafkaConfig
leadership.py     LeadershipTracker: cache changes -> become_leader/follower/stop_replica

Wiring in a broker (what BrokerServer.startup does when zookeeper.connect is set)::

    member = ZkClusterMember(config)            # off the event loop: blocking calls
    member.connect()                            # chroot, persistent paths, cluster id
    for d in log_dirs: member.check_log_dir(<meta.properties cluster.id of d>, d)
    member.resolve_broker_id(<broker.id values stored in meta.properties>)
    ... bind listeners ...
    member.register(config.advertised_listeners)  # /brokers/ids/<id>
    store = member.start_metadata()             # the broker's MetadataStore
    member.start_controller(listener)           # every broker is a candidate
    LeadershipTracker(store, member.broker_id, replica_role_handler, loop).start()
    ...
    member.controlled_shutdown_local(); member.close()
"""
