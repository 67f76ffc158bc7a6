// Preload (sandboxed, CommonJS bundle): exposes exactly `request(method, params)` and `onNotification(handler)` to
// the panel. Everything else stays in main; the renderer never sees ipcRenderer.
import { contextBridge, ipcRenderer } from 'electron';
import { createBridgeApi } from './bridge.js';

const api = createBridgeApi(ipcRenderer);
contextBridge.exposeInMainWorld('corral', {
  request: (method: string, params?: unknown) => api.request(method, params),
  onNotification: (handler: (method: string, params: unknown) => void) => api.onNotification(handler),
});
