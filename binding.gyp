{
  # The fast pipe-mode spawner (src/process/native), with the pipe reader, the proxy's splice relay and the fd-relative
  # calls of confined fs/* (fsat.c): Linux only. Elsewhere nothing is built and
  # src/process/spawner.ts falls back to child_process.
  'targets': [
    {
      'target_name': 'corral_spawn',
      'conditions': [
        ['OS=="linux"', {
          'sources': ['src/process/native/spawn.c', 'src/process/native/pipes.c', 'src/process/native/reactor.c', 'src/process/native/watchdog.c', 'src/process/native/relay.c', 'src/process/native/netns.c', 'src/process/native/fsat.c'],
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
  ],
}
