"""The data owner's side: datasets, compiled-model cache and (later) the gRPC services."""
