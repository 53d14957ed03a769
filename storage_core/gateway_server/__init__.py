"""The gateway's network layer: listeners, client and broker connections, the handler table with one module
per intercepted API (handlers/), metrics and readiness. The protocol decisions it applies live in
storage_core.gateway (tested on bytes, without sockets).

Layer: the gateway's network layer (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
