import { constants as fsc } from 'node:fs';
import { constants } from 'node:os';
import type { NativeFs } from '../../platform/confinedFs.js';
import { errnoError } from '../../platform/errno.js';
import { internalError } from '../../protocol/errors.js';
import type { FsRules, FsStep } from '../../sandbox/fsAccess.js';
import type { FsBackend, FsNodeInfo, Located, NodeKind, OpenedFile } from './fsBackend.js';
import { closeFd, nodeInfo, notRegularFile } from './fsIo.js';

/**
 * The backend of fs/* requests with a sandbox context: nothing is ever used by name. A path is walked one component
 * at a time from an fd of `/` (fsat.c: openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS and
 * O_NOFOLLOW, relative to the parent's fd); a symlink is read through its own O_PATH fd and its target walked the
 * same way; each step is decided by FsRules on what was opened (its walked path, its dev:ino). What is then done
 * happens relative to those fds: a swapped-in symlink can only ever make a step fail, never lead it elsewhere.
 */

/** An opened directory: its O_PATH fd and its step (and, for the walk's link rule, its mode and owner). */
export interface ConfinedDir {
  fd: number;
  step: FsStep;
  path: string;
  mode?: number;
  uid?: number;
}

interface ConfinedLocated extends Located<ConfinedDir> {
  /** The path the request named (for messages). */
  requested: string;
  step: FsStep;
  /** O_PATH fd of the object itself (-1: missing, or given back). */
  fd: number;
  /** Whether `parent` belongs to this Located (walked for it) rather than to the caller (lookup). */
  ownsParent: boolean;
}

const O_PATH = 0o10000000;
const { ENOENT, EAGAIN, EEXIST, ENOTDIR, EISDIR, ELOOP, EBUSY } = constants.errno;
const MAX_LINKS = 40;

const DT_KIND: Record<number, NodeKind> = {
  1: 'fifo',
  2: 'char',
  4: 'dir',
  6: 'block',
  8: 'file',
  10: 'symlink',
  12: 'socket',
};

function split(path: string): string[] {
  return path.split('/').filter((c) => c !== '' && c !== '.');
}

function joinPath(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`;
}

let rootFd = -1;
const EUID = process.geteuid?.() ?? -1;

function sticky(d: ConfinedDir): boolean {
  return d.mode !== undefined && (d.mode & 0o1002) === 0o1002;
}

export class ConfinedFs implements FsBackend<ConfinedDir> {
  private readonly root: ConfinedDir;

  constructor(
    private readonly n: NativeFs,
    private readonly rules: FsRules,
  ) {
    if (rootFd < 0) {
      rootFd = n.openRoot();
      if (rootFd < 0) throw errnoError(rootFd, 'open /');
    }
    this.learnIdentities();
    const st = this.info(rootFd);
    this.root = this.dirOf(rules.root(st.ident), rootFd, st);
  }

  /** The identities the policy's read and `none` paths have right now (opened without following any symlink). */
  private learnIdentities(): void {
    const open = new Map<string, number>([['/', rootFd]]);
    const openDir = (path: string): number => {
      const known = open.get(path);
      if (known !== undefined) return known;
      const cut = path.lastIndexOf('/');
      const parent = openDir(cut === 0 ? '/' : path.slice(0, cut));
      const fd = parent < 0 ? -1 : this.n.openAt(parent, path.slice(cut + 1), O_PATH);
      open.set(path, fd);
      return fd;
    };
    try {
      for (const p of this.rules.guardedPaths) {
        const fd = openDir(p);
        if (fd >= 0) this.rules.addIdentity(p, this.n.stat(fd).ident);
      }
    } finally {
      for (const fd of open.values()) if (fd !== rootFd) closeFd(fd);
    }
  }

  /** What an fd is (its fd closed when fstat fails). */
  private statOrClose(fd: number): FsNodeInfo {
    try {
      return this.info(fd);
    } catch (e) {
      closeFd(fd);
      throw e;
    }
  }

  private info(fd: number): FsNodeInfo {
    const st = this.n.stat(fd);
    return nodeInfo(st, st.ident);
  }

  private deny(requested: string, step: FsStep, mode: 'read' | 'write'): void {
    const why = this.rules.denial(step, mode);
    if (why) throw internalError(this.rules.message(requested, step, mode, why));
  }

  private dirOf(step: FsStep, fd: number, info: FsNodeInfo | null): ConfinedDir {
    return { fd, step, path: step.path, mode: info?.mode, uid: info?.uid };
  }

  async locate(path: string, follow: boolean): Promise<ConfinedLocated> {
    const stack: ConfinedDir[] = [this.root];
    const pending = split(path);
    let links = 0;
    let through: FsStep | null = null;
    // Closes the walk's directory fds but `keep` (once each: a closed fd number may be reused at once).
    const unwind = (keep: ConfinedDir | null) => {
      for (const d of stack)
        if (d !== keep && d.fd !== rootFd) {
          closeFd(d.fd);
          d.fd = -1;
        }
    };
    try {
      while (pending.length > 0) {
        const name = pending.shift()!;
        const top = stack[stack.length - 1]!;
        if (name === '..') {
          if (stack.length > 1) closeFd(stack.pop()!.fd);
          continue;
        }
        // (A `..` pops what the walk came through: `/` has no parent, and a directory is left by the way it was
        // entered, so a `..` never reaches above the walk's own chain.)
        const last = pending.length === 0;
        const fd = this.n.openAt(top.fd, name, O_PATH);
        if (fd < 0) {
          let missing = this.rules.child(top.step, name, null);
          if (through) missing = this.rules.throughLink(missing, through);
          if (-fd === ENOENT && last) {
            unwind(top);
            return {
              path: missing.path,
              requested: path,
              parent: top,
              name,
              info: null,
              step: missing,
              fd: -1,
              ownsParent: true,
            };
          }
          // Nothing about an unreadable directory is told, not even which names are missing in it.
          this.deny(path, missing, 'read');
          throw errnoError(fd, 'openat2');
        }
        const info = this.statOrClose(fd);
        let step = this.rules.child(top.step, name, info.ident);
        if (through) step = this.rules.throughLink(step, through);
        if (info.kind === 'symlink' && (!last || follow)) {
          try {
            // Following a link reads it.
            this.deny(path, step, 'read');
            // The kernel's protected_symlinks rule, which a walk by hand would bypass otherwise: in a sticky
            // world-writable directory (/tmp) only links of ours or of the directory's owner are followed.
            if (sticky(top) && info.uid !== EUID && info.uid !== top.uid)
              throw internalError(
                `sandbox denied following ${step.path}: a symlink owned by uid ${info.uid} in the sticky, world-writable ${top.path}`,
              );
            if (++links > MAX_LINKS) throw errnoError(ELOOP, 'openat2');
            const target = this.n.readlink(fd);
            if (step.protectedName !== null) through = step;
            if (target.startsWith('/')) {
              unwind(null);
              stack.length = 1;
            }
            pending.unshift(...split(target));
          } finally {
            closeFd(fd);
          }
          continue;
        }
        if (last) {
          unwind(top);
          return { path: step.path, requested: path, parent: top, name, info, step, fd, ownsParent: true };
        }
        if (info.kind !== 'dir') {
          closeFd(fd);
          throw errnoError(ENOTDIR, 'openat2');
        }
        stack.push(this.dirOf(step, fd, info));
      }
      // The walk ended on a directory itself (`/`, or a path ending in `..` or a link to one).
      const top = stack[stack.length - 1]!;
      const info = this.info(top.fd);
      unwind(top);
      return {
        path: top.path,
        requested: path,
        parent: null,
        name: '',
        info,
        step: top.step,
        fd: top.fd,
        ownsParent: false,
      };
    } catch (e) {
      unwind(null);
      throw e;
    }
  }

  async lookup(dir: ConfinedDir, dirPath: string, name: string): Promise<ConfinedLocated> {
    const requested = joinPath(dirPath, name);
    const fd = this.n.openAt(dir.fd, name, O_PATH);
    if (fd < 0) {
      const step = this.rules.child(dir.step, name, null);
      if (-fd !== ENOENT) {
        this.deny(requested, step, 'read');
        throw errnoError(fd, 'openat2');
      }
      return { path: step.path, requested, parent: dir, name, info: null, step, fd: -1, ownsParent: false };
    }
    const info = this.statOrClose(fd);
    const step = this.rules.child(dir.step, name, info.ident);
    return { path: step.path, requested, parent: dir, name, info, step, fd, ownsParent: false };
  }

  async enter(at: Located<ConfinedDir>): Promise<ConfinedDir> {
    const a = at as ConfinedLocated;
    if (a.info?.kind !== 'dir') throw errnoError(a.info ? ENOTDIR : ENOENT, 'openat2');
    let fd: number;
    if (a.fd >= 0 && a.parent) {
      // The Located's own fd moves into the handle (a deep walk then holds one fd per level); it stays usable by
      // name (unlink, check), and a second enter opens the directory again by name.
      fd = a.fd;
      a.fd = -1;
    } else if (a.fd >= 0) fd = this.n.dup(a.fd);
    else fd = this.reopen(a, 'fs/*', O_PATH | fsc.O_DIRECTORY).fd;
    if (fd < 0) throw errnoError(fd, 'dup');
    return this.dirOf(a.step, fd, a.info);
  }

  async list(dir: ConfinedDir, dirPath: string, max: number) {
    this.deny(dirPath, dir.step, 'read');
    return this.n
      .readDir(dir.fd, max)
      .map((e) => ({ name: e.name, kind: DT_KIND[e.type] ?? ('unknown' as const) }));
  }

  /** Opens the located file by its name in its parent again, and makes sure it is still the object located. */
  private reopen(a: ConfinedLocated, method: string, flags: number): OpenedFile {
    if (!a.parent) throw errnoError(EISDIR, 'open');
    const fd = this.n.openAt(a.parent.fd, a.name, flags);
    if (fd < 0) {
      if (-fd === ELOOP) throw this.changed(method, a);
      throw errnoError(fd, 'openat2');
    }
    const info = this.info(fd);
    if (info.ident !== a.info!.ident) {
      closeFd(fd);
      throw this.changed(method, a);
    }
    return { fd, info };
  }

  private changed(method: string, a: ConfinedLocated) {
    return internalError(
      `${method}: ${a.requested} changed while it was being opened; nothing was done, try again`,
    );
  }

  private regular(method: string, a: ConfinedLocated): void {
    if (!a.info) throw errnoError(ENOENT, 'open');
    if (a.info.kind === 'dir') throw errnoError(EISDIR, 'open');
    if (a.info.kind !== 'file') throw notRegularFile(method, a.requested, a.info.kind);
  }

  async openRead(at: Located<ConfinedDir>, method: string): Promise<OpenedFile> {
    const a = at as ConfinedLocated;
    this.deny(a.requested, a.step, 'read');
    this.regular(method, a);
    return this.reopen(a, method, fsc.O_RDONLY | fsc.O_NONBLOCK);
  }

  /**
   * Never truncates in the open (openWrite's `truncate` is not taken): the reopen by name is checked against the
   * located inode only after it, and a file swapped in meanwhile (a hard link to one the context may not write) must
   * be left as it was.
   */
  async openWrite(at: Located<ConfinedDir>, method: string, mode: number): Promise<OpenedFile> {
    const a = at as ConfinedLocated;
    this.deny(a.requested, a.step, 'write');
    if (!a.info) {
      if (!a.parent) throw errnoError(EISDIR, 'open');
      const fd = this.n.openAt(
        a.parent.fd,
        a.name,
        fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NONBLOCK,
        mode,
      );
      if (fd < 0) {
        if (-fd === EEXIST || -fd === ELOOP) throw this.changed(method, a);
        throw errnoError(fd, 'openat2');
      }
      return { fd, info: this.info(fd) };
    }
    this.regular(method, a);
    // The kernel's protected_regular rule, as for an open(O_CREAT) by name: another user's file in a sticky
    // world-writable directory is not written.
    if (a.parent && sticky(a.parent) && a.info!.uid !== EUID && a.info!.uid !== a.parent.uid)
      throw internalError(
        `sandbox denied write to ${a.requested}: a file owned by uid ${a.info!.uid} in the sticky, world-writable ${a.parent.path}`,
      );
    return this.reopen(a, method, fsc.O_WRONLY | fsc.O_NONBLOCK);
  }

  private parentOf(a: ConfinedLocated, syscall: string): ConfinedDir {
    if (!a.parent) throw errnoError(a.info ? EBUSY : ENOENT, syscall);
    return a.parent;
  }

  async mkdir(at: Located<ConfinedDir>, mode: number): Promise<void> {
    const a = at as ConfinedLocated;
    this.deny(a.requested, a.step, 'write');
    const r = this.n.mkdirAt(this.parentOf(a, 'mkdirat').fd, a.name, mode);
    if (r < 0) throw errnoError(r, 'mkdirat');
  }

  async unlink(at: Located<ConfinedDir>): Promise<void> {
    const a = at as ConfinedLocated;
    this.deny(a.requested, a.step, 'write');
    const r = this.n.unlinkAt(this.parentOf(a, 'unlinkat').fd, a.name, a.info?.kind === 'dir');
    if (r < 0) throw errnoError(r, 'unlinkat');
  }

  async symlink(at: Located<ConfinedDir>, target: string): Promise<void> {
    const a = at as ConfinedLocated;
    this.deny(a.requested, a.step, 'write');
    const r = this.n.symlinkAt(target, this.parentOf(a, 'symlinkat').fd, a.name);
    if (r < 0) throw errnoError(r, 'symlinkat');
  }

  async readlink(at: Located<ConfinedDir>): Promise<string> {
    const a = at as ConfinedLocated;
    this.deny(a.requested, a.step, 'read');
    if (a.info?.kind !== 'symlink' || a.fd < 0) throw errnoError(EAGAIN, 'readlinkat');
    return this.n.readlink(a.fd);
  }

  async canonical(at: Located<ConfinedDir>): Promise<string> {
    return at.path;
  }

  check(at: Located<ConfinedDir>, mode: 'read' | 'write'): void {
    const a = at as ConfinedLocated;
    this.deny(a.requested, a.step, mode);
  }

  release(x: Located<ConfinedDir> | ConfinedDir | null): void {
    if (!x) return;
    if ('requested' in x) {
      const a = x as ConfinedLocated;
      if (a.fd >= 0 && a.fd !== rootFd && a.fd !== a.parent?.fd) closeFd(a.fd);
      a.fd = -1;
      if (a.ownsParent && a.parent && a.parent.fd !== rootFd) closeFd(a.parent.fd);
      a.ownsParent = false;
      return;
    }
    const d = x as ConfinedDir;
    if (d.fd >= 0 && d.fd !== rootFd) closeFd(d.fd);
    d.fd = -1;
  }
}
