// A virtualized table body: only the rows on screen (and a few either side) are in the DOM, as real <tr>s between
// two spacer rows that stand for the rest, so a 100 000-row table has about 60 <tr>s. Rows have one fixed height.
// Rendering patches: a row element is re-bound only when the item in its slot or that item's version changed.
// While the user is scrolled away from the top, the rows in view stay in view when rows are added above them.

export interface VirtualRowsOptions<T> {
  /** The scrolling element (overflow: auto) that holds the table. */
  scroller: HTMLElement;
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
}

export class VirtualRows<T> {
  private readonly top: HTMLTableRowElement;
  private readonly bottom: HTMLTableRowElement;
  private readonly topCell: HTMLTableCellElement;
  private readonly bottomCell: HTMLTableCellElement;
  private slots: Slot<T>[] = [];
  /** Row elements out of the table (the view shrank), reused before any new one is made. */
  private readonly spare: Slot<T>[] = [];
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
      const slot = this.slots[idx - this.slotFirst];
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
    const bottomPx = `${(count - last) * rh}px`;
    if (this.bottomCell.style.height !== bottomPx) this.bottomCell.style.height = bottomPx;
    this.bottom.hidden = last >= count;
    // Grow or shrink the rows in the table to the rows in view. Rows taken out are kept, cells and all, and put
    // back first: a filter that empties the table and the key that undoes it make no element.
    while (this.slots.length < n) {
      const slot = this.spare.pop() ?? {
        tr: document.createElement('tr'),
        item: null,
        version: -1,
        stamp: -1,
      };
      this.o.tbody.insertBefore(slot.tr, this.bottom);
      this.slots.push(slot);
    }
    while (this.slots.length > n) {
      const slot = this.slots.pop()!;
      slot.tr.remove();
      slot.item = null;
      this.spare.push(slot);
    }
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
