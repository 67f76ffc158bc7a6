// The panel. (Desktop issue.)
export {};
