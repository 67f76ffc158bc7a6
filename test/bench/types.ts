/** One line of the benchmark table printed by test/bench/run.ts. */
export interface BenchRow {
  section: string;
  metric: string;
  /** Corral's figure (a number, or a short text such as "n/a"). */
  corral: number | string;
  /** The reference's figure in the same unit, when there is one (Codex, or a baseline implementation). */
  reference?: number | string;
  unit: string;
  /** The goal, as text: "≤ 3 ms", "≥ 1500 /s". */
  target?: string;
}

/** What every test/bench/*.bench.ts module exports. */
export interface BenchModule {
  run(): Promise<BenchRow[]>;
}
