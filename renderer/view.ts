// What every view of the panel is, and what it is given: the types the views share, apart from the entry module
// (app.ts builds the page when it loads; a view importing it would run that).
import type { Connection } from './client.js';
import type { Store } from './store.js';

export interface View {
  readonly el: HTMLElement;
  show?(): void;
  hide?(): void;
}

export type ViewName = 'processes' | 'network' | 'approvals' | 'servers' | 'history' | 'policy' | 'run';

export interface AppContext {
  store: Store;
  conn: Connection;
  go(view: ViewName, arg?: string): void;
  toast(text: string, kind?: 'info' | 'error'): void;
}
