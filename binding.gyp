{
  # The fast pipe-mode spawner (src/process/native), with the pipe reader, the proxy's splice relay, the fd-relative
  # calls of confined fs/* (fsat.c) and the Linux sandbox's helpers (src/sandbox/linux/native): Linux only. Elsewhere
  # nothing is built and src/process/spawner.ts falls back to child_process (a Linux sandbox then refuses to start).
  'targets': [
    {
      'target_name': 'corral_spawn',
      'conditions': [
        ['OS=="linux"', {
          'sources': ['src/process/native/spawn.c', 'src/process/native/pipes.c', 'src/process/native/reactor.c', 'src/process/native/watchdog.c', 'src/process/native/relay.c', 'src/process/native/netns.c', 'src/process/native/fsat.c', 'src/sandbox/linux/native/sandbox.c', 'src/process/native/landlock.c', 'src/process/native/confine.c'],
          'cflags': ['-O2', '-Wall', '-Wextra', '-Wno-unused-parameter', '-Wno-missing-field-initializers'],
          # Bind every symbol at load time: a child running in our memory before exec must never enter the lazy
          # PLT resolver.
          'ldflags': ['-Wl,-z,now'],
          'libraries': ['-ldl'],
        }, {
          'type': 'none',
        }],
      ],
    },
    {
      # The launcher of sandboxed terminals (fresh session keyring, exactly the fds it is given, the Landlock backend's
      # confinement, the supervisor of a Landlock command: supervise.c): see launcher.c.
      'target_name': 'corral-sandbox-exec',
      'conditions': [
        ['OS=="linux"', {
          'type': 'executable',
          'sources': ['src/sandbox/linux/native/launcher.c', 'src/sandbox/linux/native/supervise.c', 'src/process/native/confine.c'],
          'cflags': ['-O2', '-Wall', '-Wextra'],
        }, {
          'type': 'none',
        }],
      ],
    },
  ],
}
