// A virtualized table body: only the rows on screen (and a few either side) are in the DOM, as real <tr>s between
// two spacer rows that stand for the rest, so a 100 000-row table has about 60 <tr>s. Rows have one fixed height.
// Rendering patches: a row element is re-bound only when the item in its slot or that item's version changed.
// While the user is scrolled away from the top, the rows in view stay in view when rows are added above them.
// When the view shrinks (a key that empties the table), the rows it no longer needs stay in the table, hidden and
// still bound (nothing is laid out again), without the data-* attributes that name their items to a query (put back
// when shown) and out of the accessibility tree (aria-hidden), and a box around the table (`clip`) is held to the
// height the rows in view need, so they add no scroll area; the key that undoes it shows them again as they were
// (issue 38: a key and its undo cost a third less than taking the rows out and putting them back). Rows the clip box
// cuts off need nothing more; rows that stand where items of the list still are (the bottom spacer's place, below the
// overscan) are also made invisible (visibility), so that a fast scroll never shows an item that is not there.
// Visibility restyles the row and every cell in it: applied to every hidden row it was most of what the view added to
// a key (style recalc and prepaint ~8 of ~10 ms a key pair).

export interface VirtualRowsOptions<T> {
  /** The scrolling element (overflow: auto) that holds the table. */
  scroller: HTMLElement;
  /**
   * The box around the table, inside the scroller (styles.css .vclip: overflow: clip, which keeps the header
   * sticky to the scroller): its height is set to what the shown rows need, so hidden rows take no scroll area.
   */
  clip: HTMLElement;
  tbody: HTMLTableSectionElement;
  rowHeight: number;
  /** Columns of a row (the spacers span them). */
  columns: () => number;
  count(): number;
  at(i: number): T | undefined;
  indexOf(item: T): number;
  key(item: T): string;
  version(item: T): number;
  /** Fills a row element for an item (the element is reused for other items). */
  bind(tr: HTMLTableRowElement, item: T): void;
  overscan?: number;
}

interface Slot<T> {
  tr: HTMLTableRowElement;
  item: T | null;
  version: number;
  stamp: number;
  /** A hidden row's data-* attributes (what names its item to a query), put back when it is shown. */
  saved: [string, string][] | null;
  /** Whether it has `vhidden` (visibility: hidden): a hidden row the clip box does not cut off. */
  veiled: boolean;
}

/** Hides a row: still laid out and bound, but no query for its item's data-* attributes finds it. */
function hideRow(slot: Slot<unknown>): void {
  const tr = slot.tr;
  tr.setAttribute('aria-hidden', 'true');
  const saved: [string, string][] = [];
  for (const a of tr.attributes) if (a.name.startsWith('data-')) saved.push([a.name, a.value]);
  for (const [name] of saved) tr.removeAttribute(name);
  slot.saved = saved;
}

function showRow(slot: Slot<unknown>): void {
  const tr = slot.tr;
  tr.removeAttribute('aria-hidden');
  veil(slot, false);
  if (slot.saved) for (const [name, value] of slot.saved) tr.setAttribute(name, value);
  slot.saved = null;
}

/** Makes a hidden row invisible (visibility) or not; only when that changes (it restyles the row and its cells). */
function veil(slot: Slot<unknown>, on: boolean): void {
  if (slot.veiled === on) return;
  slot.veiled = on;
  slot.tr.classList.toggle('vhidden', on);
}

export class VirtualRows<T> {
  private readonly top: HTMLTableRowElement;
  private readonly bottom: HTMLTableRowElement;
  private readonly topCell: HTMLTableCellElement;
  private readonly bottomCell: HTMLTableCellElement;
  /** Every row element in the table, in order: the first `shown` are in view, the rest hidden (the view shrank). */
  private slots: Slot<T>[] = [];
  private shown = 0;
  private anchor: { item: T; offset: number } | null = null;
  /** Bumped to re-bind every row (a column appeared, the selection moved). */
  private stamp = 0;
  private first = 0;
  /** The index of slots[0] at the last render. */
  private slotFirst = 0;
  /** The user scrolled since the last render: the anchor is what is under the new position, in the last layout. */
  private anchorStale = false;
  private geometry: { header: number; height: number } | null = null;
  /** The scroll position measure() read for the next render. */
  private measured: number | null = null;

  constructor(private readonly o: VirtualRowsOptions<T>) {
    const spacer = (): [HTMLTableRowElement, HTMLTableCellElement] => {
      const tr = document.createElement('tr');
      tr.className = 'vspacer';
      tr.setAttribute('aria-hidden', 'true');
      const td = document.createElement('td');
      tr.appendChild(td);
      return [tr, td];
    };
    [this.top, this.topCell] = spacer();
    [this.bottom, this.bottomCell] = spacer();
    o.tbody.append(this.top, this.bottom);
    o.scroller.addEventListener('scroll', () => this.onScroll(), { passive: true });
    new ResizeObserver(() => {
      this.geometry = null;
      this.onScroll();
    }).observe(o.scroller);
  }

  private scheduled = false;
  private onScroll(): void {
    this.anchorStale = true;
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.render();
    });
  }

  /** Re-binds every visible row at the next render (and measures the header again). */
  invalidate(): void {
    this.stamp++;
    this.geometry = null;
  }

  /**
   * Reads what the next render needs of the layout. A view that renders several tables calls it on each before it
   * renders any: their reads then share one layout instead of each forcing one after the previous one's writes.
   */
  measure(): void {
    const o = this.o;
    this.geometry ??= { header: o.tbody.offsetTop, height: o.scroller.clientHeight };
    this.measured = o.scroller.scrollTop;
  }

  /** Re-binds every visible row at the next render (their text moved on: relative times), geometry unchanged. */
  rebind(): void {
    this.stamp++;
  }

  /** The first row index in view (0 at the top). */
  get firstVisible(): number {
    return this.first;
  }

  /**
   * Renders the rows in view now. Call once per frame at most (from requestAnimationFrame). Geometry is read before
   * anything is written (the header's height and the viewport's only when they may have changed), so a render does
   * not force a layout of its own.
   */
  render(): void {
    const o = this.o;
    const sc = o.scroller;
    const rh = o.rowHeight;
    const count = o.count();
    this.geometry ??= { header: o.tbody.offsetTop, height: sc.clientHeight };
    const { header, height } = this.geometry;
    let raw = this.measured ?? sc.scrollTop;
    this.measured = null;
    let scrollTo: number | null = null;
    if (this.anchorStale) {
      this.anchorStale = false;
      const idx = Math.floor(Math.max(0, raw - header) / rh);
      const slot = idx - this.slotFirst < this.shown ? this.slots[idx - this.slotFirst] : undefined;
      this.anchor = raw - header > rh / 2 && slot?.item ? { item: slot.item, offset: raw - idx * rh } : null;
    }
    // Keep what the user is looking at in place when rows arrive above it.
    if (this.anchor) {
      const i = o.indexOf(this.anchor.item);
      if (i >= 0) {
        const want = i * rh + this.anchor.offset;
        if (Math.abs(raw - want) >= 1) {
          raw = want;
          scrollTo = want;
        }
      }
    }
    const overscan = o.overscan ?? 8;
    const scrollTop = Math.max(0, raw - header);
    const visible = Math.ceil(height / rh) + 1;
    const top = Math.floor(scrollTop / rh);
    const first = Math.max(0, Math.min(count, top - overscan));
    const last = Math.min(count, top + visible + overscan);
    this.first = Math.min(count, top);
    const n = Math.max(0, last - first);
    const cols = o.columns();
    if (this.topCell.colSpan !== cols) {
      this.topCell.colSpan = cols;
      this.bottomCell.colSpan = cols;
    }
    const topPx = `${first * rh}px`;
    if (this.topCell.style.height !== topPx) this.topCell.style.height = topPx;
    this.top.hidden = first === 0;
    // Rows kept hidden below the shown ones stand for that many rows of the bottom spacer; the clip box cuts off
    // what they reach past the last row.
    const hidden = Math.max(0, this.slots.length - n);
    const bottomPx = `${Math.max(0, count - last - hidden) * rh}px`;
    if (this.bottomCell.style.height !== bottomPx) this.bottomCell.style.height = bottomPx;
    this.bottom.hidden = last + hidden >= count;
    const clipPx = hidden > count - last ? `${header + count * rh + 1}px` : '';
    if (o.clip.style.height !== clipPx) o.clip.style.height = clipPx;
    // Show or hide rows to the rows in view, making rows only when there are not enough.
    while (this.slots.length < n) {
      const slot = {
        tr: document.createElement('tr'),
        item: null,
        version: -1,
        stamp: -1,
        saved: null,
        veiled: false,
      };
      this.o.tbody.insertBefore(slot.tr, this.bottom);
      this.slots.push(slot);
    }
    for (let i = this.shown; i < n; i++) showRow(this.slots[i]!);
    for (let i = n; i < this.shown; i++) hideRow(this.slots[i]!);
    // A hidden row in slot i sits where item first + i would: those up to the end of the list (and the first past
    // it, which the clip box's extra pixel reaches) are made invisible; the rest are cut off by the clip box.
    for (let i = n; i < this.slots.length; i++) veil(this.slots[i]!, first + i <= count);
    this.shown = n;
    for (let i = 0; i < n; i++) {
      const slot = this.slots[i]!;
      const item = o.at(first + i)!;
      const version = o.version(item);
      if (slot.item === item && slot.version === version && slot.stamp === this.stamp) continue;
      slot.item = item;
      slot.version = version;
      slot.stamp = this.stamp;
      o.bind(slot.tr, item);
    }
    this.slotFirst = first;
    if (scrollTo !== null) sc.scrollTop = scrollTo;
    // The anchor for the next render: the first row in view, unless the list is scrolled to its top.
    const topItem = scrollTop > rh / 2 ? o.at(this.first) : undefined;
    this.anchor = topItem ? { item: topItem, offset: raw - this.first * rh } : null;
  }

  /** Scrolls so that row `i` is in view. */
  reveal(i: number): void {
    const sc = this.o.scroller;
    const rh = this.o.rowHeight;
    const y = this.o.tbody.offsetTop + i * rh;
    if (y < sc.scrollTop || y + rh > sc.scrollTop + sc.clientHeight)
      sc.scrollTop = Math.max(0, y - sc.clientHeight / 3);
    this.anchor = null;
  }
}
