"""Plumbing every service shares on the event loop: the server's own options (``options``), the
one interceptor (``boundary``), grpc's connection limits (``transport``), the loop thread of
in-process servers (``event_loop``), synchronous servicers on bounded pools (``worker_threads``),
fair shares and admission slots (``fair_share``, ``admission``), health (``health``), who is
calling and what each may hold (``callers``), one log line per call (``call_log``), the domain
errors servicers raise, each naming its status (``rpc_errors``). Owner-only files are
``petlab.owner_only``'s."""
