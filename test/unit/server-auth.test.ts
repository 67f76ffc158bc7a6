import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { hostHeaderAllowed } from '../../src/server/connection/wsListener.js';
import {
  digestVerifier,
  generateToken,
  hostAuth,
  hostTokens,
  jwtCredential,
  openAccess,
  presentedCredential,
  tokenAuth,
} from '../../src/server/core/auth.js';

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
const url = (q = '') => new URL(`http://127.0.0.1/${q}`);

describe('server auth (src/server/core/auth.ts)', () => {
  it('tokens are 256-bit base64url, fresh each time', () => {
    const a = generateToken();
    assert.match(a, /^[\w-]{43}$/);
    assert.notEqual(a, generateToken());
  });

  it('a credential is taken from Bearer, then X-Corral-Token, then ?token= (the first present only)', () => {
    assert.equal(presentedCredential(req({ authorization: 'Bearer abc' }), url('?token=q')), 'abc');
    assert.equal(presentedCredential(req({ authorization: 'bearer   abc  ' }), url()), 'abc');
    assert.equal(presentedCredential(req({ 'x-corral-token': 'h' }), url('?token=q')), 'h');
    assert.equal(presentedCredential(req({ authorization: 'Basic abc' }), url('?token=q')), 'q');
    assert.equal(presentedCredential(req({}), url()), null);
  });

  it('agent and panel tokens map to their roles; anything else is refused', () => {
    const tokens = hostTokens();
    const auth = hostAuth(tokens);
    assert.equal(auth.authenticate(req({}), url(`?token=${tokens.agent}`))?.principal.role, 'agent');
    assert.equal(auth.authenticate(req({}), url(`?token=${tokens.panel}`))?.principal.role, 'panel');
    assert.equal(auth.authenticate(req({}), url(`?token=${tokens.panel}x`)), null);
    assert.equal(auth.authenticate(req({}), url()), null);
    assert.deepEqual([...auth.secrets].sort(), [tokens.agent, tokens.panel].sort());
    assert.throws(() => hostTokens({ agent: 'same', panel: 'same' }), /must differ/);
  });

  it('a digest verifier (the shape of a later --ws-token-sha256) knows no secret and accepts the token', () => {
    const sha256 = createHash('sha256').update('the-token').digest();
    const v = digestVerifier([{ sha256, principal: { role: 'agent', credential: 'sha' } }]);
    assert.deepEqual(v.verify('the-token'), { role: 'agent', credential: 'sha' });
    assert.equal(v.verify('the-token '), null);
    assert.deepEqual(v.secrets, []);
    // The listener then scrubs the credential as presented.
    assert.equal(
      tokenAuth('t0123456789').authenticate(req({}), url('?token=t0123456789'))?.presented,
      't0123456789',
    );
  });

  it('--ws-auth none: everyone is an agent, never the panel', () => {
    const r = openAccess().authenticate(req({}), url());
    assert.equal(r?.principal.role, 'agent');
  });

  it('Host: loopback names and the bound address, any port; other names are refused', () => {
    for (const h of ['127.0.0.1:80', 'localhost:1234', '[::1]:9', 'localhost', 'LOCALHOST:2'])
      assert.ok(hostHeaderAllowed(h, '127.0.0.1'), h);
    for (const h of ['evil.example:80', '127.0.0.1.evil.example', 'localhost.evil:1', '', undefined])
      assert.ok(!hostHeaderAllowed(h, '127.0.0.1'), String(h));
    assert.ok(hostHeaderAllowed('10.1.2.3:5', '10.1.2.3'));
  });

  it('a JWT subject is named unambiguously: each part percent-encoded; non-string claims and no subject refused', () => {
    assert.equal(jwtCredential('a/b', 'c'), 'jwt:a%2Fb/c');
    assert.equal(jwtCredential('a', 'b/c'), 'jwt:a/b%2Fc');
    assert.equal(jwtCredential('https://idp.test', 'alice'), 'jwt:https%3A%2F%2Fidp.test/alice');
    assert.equal(jwtCredential(undefined, 'alice'), 'jwt:/alice');
    assert.notEqual(jwtCredential('a%2Fb', 'c'), jwtCredential('a/b', 'c'));
    for (const [iss, sub] of [
      ['a', 42],
      ['a', {}],
      ['a', ['x']],
      ['a', null],
      ['a', ''],
      ['a', undefined],
      [1, 'x'],
      [null, 'x'],
      [['a'], 'x'],
    ] as const)
      assert.equal(jwtCredential(iss, sub), null, JSON.stringify([iss, sub]));
  });
});
