// Preload: exposes request(method, params) and onNotification(handler) through contextBridge. (Desktop issue.)
export {};
