"""An emulated internet for end-to-end tests: Linux network namespaces with real node processes.

``tests.net.netns.Internet`` builds it (public hosts on a shared bridge in 198.18.0.0/15, homes
behind nftables masquerade routers in 100.64.0.0/10), ``tests.net.nodes.NetNode`` runs
``syncnode run`` inside a namespace and reaches its API through a Unix socket. See
docs/network.md "The emulated internet".
"""
