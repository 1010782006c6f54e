"""Plumbing every service shares: who is calling (``callers``, ``caller_flags``), admission slots and
upload watchdogs (``admission``), the interceptors (``undecodable``, ``thread_share``), one log line
per call (``call_log``), typed error answers (``rpc_errors``). Owner-only files are
``petlab.owner_only``'s."""
