"""The torch-free core: sample records, the run store, the run config and the typed run state.

gate/, stats/ and report/ import only this layer of the run machinery."""
