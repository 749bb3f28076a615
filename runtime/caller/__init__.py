"""The caller's side of a call: handles, the connection to an actor, its liveness, streams, waiting, retries."""
