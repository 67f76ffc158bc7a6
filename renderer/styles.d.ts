// The stylesheets the renderer imports for their side effect (the bundler inlines them): a type for TypeScript's
// check of side-effect imports, nothing more.
declare module '*.css';
