"""Apache Mesos' v1 HTTP API served by mezzo: translation, RecordIO, the scheduler façade."""
