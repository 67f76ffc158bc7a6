import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CrdSchemas,
  corralContainer,
  corralDeploymentProblems,
  crdDirectory,
  readManifests,
} from '../helpers/fleet/manifests.js';

/** deploy/kubernetes/ against agent-sandbox's CRD schemas (issue 19.3a), and against what Corral needs. */

const schemas = CrdSchemas.load(crdDirectory());
const manifests = readManifests();
const docs = manifests.map((m) => m.doc);

type Json = Record<string, unknown>;
const clone = <T>(x: T): T => structuredClone(x);
const byKind = (k: string) => clone(docs.find((d) => d.kind === k)!) as Json & { spec: Json };

describe('deploy/kubernetes manifests', () => {
  it('has the three kinds', () => {
    assert.deepEqual(manifests.map((m) => `${m.file}: ${m.doc.kind}`).sort(), [
      'sandboxclaim.yaml: SandboxClaim',
      'sandboxtemplate.yaml: SandboxTemplate',
      'sandboxwarmpool.yaml: SandboxWarmPool',
    ]);
  });

  it('every manifest is valid against its CRD schema (strict fields)', () => {
    assert.ok(
      schemas.kinds().includes('extensions.agents.x-k8s.io/v1beta1 SandboxTemplate'),
      schemas.kinds().join(),
    );
    for (const m of manifests) assert.deepEqual(schemas.validate(m.doc), [], m.file);
  });

  it('a misspelt field, a wrong type, a bad enum, a missing required field, duplicate containers: refused', () => {
    const typo = byKind('SandboxTemplate');
    const c = corralContainer(typo);
    c.readinesProbe = c.readinessProbe;
    delete c.readinessProbe;
    assert.deepEqual(schemas.validate(typo), [
      '/spec/podTemplate/spec/containers/0: unknown field "readinesProbe"',
    ]);

    const pool = byKind('SandboxWarmPool');
    pool.spec.replicas = '3';
    assert.deepEqual(schemas.validate(pool), ['/spec/replicas: must be integer']);

    const policy = byKind('SandboxTemplate');
    policy.spec.envVarsInjectionPolicy = 'Sometimes';
    assert.deepEqual(schemas.validate(policy), [
      '/spec/envVarsInjectionPolicy: must be equal to one of the allowed values',
    ]);

    const claim = byKind('SandboxClaim');
    delete claim.spec.warmPoolRef;
    assert.deepEqual(schemas.validate(claim), ["/spec: must have required property 'warmPoolRef'"]);

    const dup = byKind('SandboxTemplate');
    const pod = (dup.spec.podTemplate as Json).spec as { containers: Json[] };
    pod.containers.push(clone(pod.containers[0]!));
    assert.deepEqual(schemas.validate(dup), [
      '/spec/podTemplate/spec/containers: has duplicate items (x-kubernetes-list-type)',
    ]);

    const meta = byKind('SandboxClaim');
    (meta.metadata as Json).name = 'Agent_Session';
    assert.match(schemas.validate(meta).join(), /^\/metadata\/name: must match pattern/);

    const version = byKind('SandboxClaim');
    version.apiVersion = 'extensions.agents.x-k8s.io/v2';
    assert.deepEqual(schemas.validate(version), ['no CRD serves extensions.agents.x-k8s.io/v2 SandboxClaim']);
  });

  it('the v1alpha1 claim shape is not what we ship (v1beta1 needs warmPoolRef, not sandboxTemplateRef)', () => {
    const old = byKind('SandboxClaim');
    old.spec = { sandboxTemplateRef: { name: 'corral' } };
    assert.deepEqual(schemas.validate(old), [
      "/spec: must have required property 'warmPoolRef'",
      '/spec: unknown field "sandboxTemplateRef"',
    ]);
    old.apiVersion = 'extensions.agents.x-k8s.io/v1alpha1';
    assert.deepEqual(schemas.validate(old), []);
  });

  it('template, pool and claim fit together and fit Corral', () => {
    assert.deepEqual(corralDeploymentProblems(docs), []);
  });

  it('what Corral and the warm pool need is checked: claim env, token in env/argv, port, probes, loopback', () => {
    const withEnv = docs.map(clone);
    const claim = withEnv.find((d) => d.kind === 'SandboxClaim') as Json & { spec: Json };
    claim.spec.env = [{ name: 'CORRAL_POLICY', value: 'x' }];
    assert.deepEqual(corralDeploymentProblems(withEnv), [
      'claim agent-session-1: env bypasses the warm pool (settings go over the protocol)',
    ]);

    const bad = docs.map(clone);
    const t = bad.find((d) => d.kind === 'SandboxTemplate')!;
    const c = corralContainer(t);
    const args = c.args as string[];
    args.splice(args.indexOf('--allow-non-loopback'), 1);
    args[args.indexOf('--listen') + 1] = 'ws://0.0.0.0:9000';
    (c.env as Json[]).push({
      name: 'CORRAL_TOKEN',
      valueFrom: { secretKeyRef: { name: 'corral-token', key: 'token' } },
    });
    ((c.readinessProbe as Json).httpGet as Json).path = '/healthz';
    const ingress = ((t.spec as Json).networkPolicy as { ingress: { ports: Json[] }[] }).ingress;
    ingress[0]!.ports[0]!.port = 9000;
    assert.deepEqual(corralDeploymentProblems(bad), [
      'template: the NetworkPolicy must let the router reach port 8888',
      'corral container: a non-loopback --listen needs --allow-non-loopback',
      'corral container: --listen port must be 8888 (the router default X-Sandbox-Port)',
      'corral container: containerPort 9000 is not declared',
      'corral container: livenessProbe must GET /healthz on 9000',
      'corral container: readinessProbe must GET /readyz on 9000',
      'corral container: env CORRAL_TOKEN carries a credential (use the token file)',
    ]);
  });

  it('the Secret volume mode is octal 0440 as Kubernetes reads YAML', () => {
    const t = byKind('SandboxTemplate');
    const vols = ((t.spec.podTemplate as Json).spec as { volumes: Json[] }).volumes;
    const secret = vols.find((v) => v.secret)!.secret as Json;
    assert.equal(secret.defaultMode, 0o440);
  });
});
