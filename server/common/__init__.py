"""Plumbing every service shares: who is calling and what each may hold (``callers``), admission slots and
upload watchdogs (``admission``), the interceptors (``undecodable``, ``thread_share``), one log line
per call (``call_log``), typed error answers (``rpc_errors``). Owner-only files are
``petlab.owner_only``'s."""
