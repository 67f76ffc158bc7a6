{
  # All of Corral's C is in src/platform/native, beside its one loader (src/platform/addon.ts): the fast pipe-mode
  # spawner with its supervisor, the pipe reader, the proxy's splice relay, the netns listener, the fd-relative calls
  # of confined fs/* (fsat.c), the Landlock ruleset and confinement, and the Linux sandbox's helpers. Linux only.
  # Elsewhere nothing is built and src/platform says per capability what is used instead (docs/architecture.md).
  'targets': [
    {
      'target_name': 'corral_spawn',
      'conditions': [
        ['OS=="linux"', {
          'sources': ['src/platform/native/spawn.c', 'src/platform/native/spawn_addon.c', 'src/platform/native/spawn_child.c', 'src/platform/native/spawn_supervisor.c', 'src/platform/native/pipes.c', 'src/platform/native/reactor.c', 'src/platform/native/watchdog.c', 'src/platform/native/relay.c', 'src/platform/native/netns.c', 'src/platform/native/fsat.c', 'src/platform/native/sandbox.c', 'src/platform/native/landlock.c', 'src/platform/native/confine.c', 'src/platform/native/netnotify.c', 'src/platform/native/fswatch.c'],
          # Hidden by default: the files share functions (spawn_state.h, spawn_child.h), and none of them may be bound to
          # a same-named symbol another library of the process exports; N-API's registration stays visible.
          'cflags': ['-O2', '-Wall', '-Wextra', '-Wno-unused-parameter', '-Wno-missing-field-initializers', '-fvisibility=hidden'],
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
          'sources': ['src/platform/native/launcher.c', 'src/platform/native/supervise.c', 'src/platform/native/confine.c'],
          'cflags': ['-O2', '-Wall', '-Wextra'],
        }, {
          'type': 'none',
        }],
      ],
    },
  ],
}
