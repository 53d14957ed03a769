"""The Kafka protocol gateway's pure part: one codec (Kafka's own message schemas, through kio), the
rewriting of broker addresses, and the decisions to serve a fetch or an offset lookup from the remote tier.
No sockets here: the network layer is storage_core.gateway_server. DESIGN.md beside this file."""
