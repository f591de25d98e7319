"""Chapter engines' shared faces: the state keys, readers and commands (start, stop, submit) both the web
process and the pool use. Each pool face is the workers/engines/ module of the same name."""
