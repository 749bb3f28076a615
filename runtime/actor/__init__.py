"""The actor's side of a call: the server, routing, admission, lanes, running, the call store, built-ins."""
