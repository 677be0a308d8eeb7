"""The stream jobs of stallwatch: the decision worker (`stallwatch_streams.worker`), the fleet app
(`stallwatch_streams.fleet`) and their Prometheus metrics (`stallwatch_streams.metrics`)."""
