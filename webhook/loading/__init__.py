"""Reading what users write: policy files, manifests and JSON documents of any depth."""
