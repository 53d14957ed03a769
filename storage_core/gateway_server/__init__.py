"""The gateway's network layer: listeners, client and broker connections, metrics and readiness. The
protocol decisions it applies live in storage_core.gateway (pure, tested on bytes)."""
