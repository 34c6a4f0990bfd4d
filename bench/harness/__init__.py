"""What the scenarios share: brokers and records (``kafka``), Spark sessions and timed reads
(``spark``), CPU and memory (``procfs``), sources that read no Kafka (``const_source``), the
driver-side member in a process of its own (``planner``) and the report writer (``docs``).
Nothing here imports a scenario."""
