// Electron main process: hosts the exec server and the panel window. (Filled in by the desktop issue.)
export {};
