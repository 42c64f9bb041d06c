"""The runtime: embedded broker, topic layout, pipeline config, stage runner on Kafka, CLI."""
